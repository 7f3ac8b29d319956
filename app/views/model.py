from app import pages

pages.model_page()
